package inspect

import "strings"

// IO property names this package fills from the environment.
const (
	propS3Endpoint = "s3.endpoint"
	propS3Region   = "s3.region"
)

// IOProps completes caller IO properties for location from the standard AWS
// environment (getenv is usually os.Getenv). Credentials and region are also
// read by the AWS SDK's default chain; the endpoint is copied explicitly
// because iceberg-go only switches to path-style addressing for an endpoint
// it was given, which S3-compatible stores such as SeaweedFS or MinIO need.
func IOProps(props map[string]string, location string, getenv func(string) string) map[string]string {
	out := make(map[string]string, len(props)+2)
	for k, v := range props {
		out[k] = v
	}
	if !isS3(location) {
		return out
	}
	if _, ok := out[propS3Endpoint]; !ok {
		if ep := firstNonEmpty(getenv("AWS_ENDPOINT_URL_S3"), getenv("AWS_ENDPOINT_URL")); ep != "" {
			out[propS3Endpoint] = ep
		}
	}
	if _, ok := out[propS3Region]; !ok {
		region := firstNonEmpty(getenv("AWS_REGION"), getenv("AWS_DEFAULT_REGION"))
		if region == "" && out[propS3Endpoint] != "" {
			// S3-compatible stores ignore the region, but the SDK refuses to sign without one.
			region = "us-east-1"
		}
		if region != "" {
			out[propS3Region] = region
		}
	}
	return out
}

func isS3(location string) bool {
	for _, scheme := range []string{"s3://", "s3a://", "s3n://"} {
		if strings.HasPrefix(strings.ToLower(location), scheme) {
			return true
		}
	}
	return false
}

func firstNonEmpty(values ...string) string {
	for _, v := range values {
		if v != "" {
			return v
		}
	}
	return ""
}
