// Command icepack-iceberg-inspector prints the TableStatus metrics of one
// Iceberg table as a single JSON object on stdout (docs/table-status.md).
// Diagnostics go to stderr. Exit status: 0 on success, 1 when the inspection
// fails, 2 on invalid arguments; failures still print the contract's error object.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"runtime/pprof"
	"strings"

	// Registers the s3:// scheme with iceberg-go's IO registry (its only
	// extension mechanism); local paths and file:// are built in.
	_ "github.com/apache/iceberg-go/io/gocloud/s3"

	"github.com/icepack-dev/icepack/go-inspector/internal/avro"
	"github.com/icepack-dev/icepack/go-inspector/internal/inspect"
	"github.com/icepack-dev/icepack/go-inspector/internal/output"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr, os.Getenv)
	stop()
	os.Exit(code)
}

// props collects repeated --prop key=value flags.
type props map[string]string

func (p props) String() string { return fmt.Sprint(map[string]string(p)) }

func (p props) Set(kv string) error {
	k, v, ok := strings.Cut(kv, "=")
	if !ok || k == "" {
		return fmt.Errorf("expected key=value, got %q", kv)
	}
	p[k] = v
	return nil
}

// run is main without process globals, so tests can drive it.
func run(ctx context.Context, args []string, stdout, stderr io.Writer, getenv func(string) string) (code int) {
	out := output.JSON{W: stdout}
	fail := func(code int, err error) int {
		if werr := out.Error(output.CodeInspectionFailed, err); werr != nil {
			fmt.Fprintln(stderr, "cannot write result:", werr)
		}
		return code
	}
	defer func() {
		if r := recover(); r != nil {
			code = fail(1, fmt.Errorf("%w: %v", inspect.ErrUnexpected, r))
		}
	}()

	fs := flag.NewFlagSet("icepack-iceberg-inspector", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var (
		location  = fs.String("metadata-location", "", "table metadata JSON file: local path, file:// or s3:// URI")
		catalog   = fs.String("catalog", "", "catalog name reported in the output (identity only)")
		namespace = fs.String("namespace", "", "namespace reported in the output (default: from the location path)")
		tableName = fs.String("table", "", "table name reported in the output (default: from the location path)")
		small     = fs.Int64("small-file-bytes", 0, "small-file threshold in bytes (default: write.target-file-size-bytes / 8)")
		maxBlock  = fs.Int64("max-block-bytes", avro.DefaultMaxBlockBytes, "most bytes one compressed Avro block may expand to (larger: the file is damaged)")
		restURI   = fs.String("rest-uri", "", "REST catalog URI (instead of --metadata-location)")
		cred      = fs.String("credential", "", "REST catalog OAuth2 credential id:secret")
		scope     = fs.String("scope", "", "REST catalog OAuth2 scope")
		warehouse = fs.String("warehouse", "", "REST catalog warehouse")
		ident     = fs.String("identifier", "", "REST mode table identifier namespace.table")
		verbose   = fs.Bool("verbose", false, "log diagnostics to stderr")
		cpuProf   = fs.String("cpuprofile", "", "write a pprof CPU profile of the inspection to this file")
		ioProps   = props{}
	)
	fs.Var(ioProps, "prop", "IO property key=value, repeatable (e.g. s3.endpoint=http://127.0.0.1:8333)")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return fail(2, fmt.Errorf("%w: %w", inspect.ErrInvalidOptions, err))
	}
	if (*location == "") == (*restURI == "") || fs.NArg() > 0 {
		return fail(2, fmt.Errorf("%w: give exactly one of --metadata-location or --rest-uri, and no positional arguments",
			inspect.ErrInvalidOptions))
	}

	if *maxBlock <= 0 {
		return fail(2, fmt.Errorf("%w: --max-block-bytes must be positive, not %d", inspect.ErrInvalidOptions, *maxBlock))
	}
	avro.SetMaxBlockBytes(*maxBlock)

	level := slog.LevelWarn
	if *verbose {
		level = slog.LevelDebug
	}
	opts := inspect.Options{
		Catalog:        *catalog,
		Namespace:      *namespace,
		Table:          *tableName,
		SmallFileBytes: *small,
		Logger:         slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: level})),
	}

	if *cpuProf != "" {
		stopProfile, err := startCPUProfile(*cpuProf)
		if err != nil {
			return fail(2, fmt.Errorf("%w: --cpuprofile: %w", inspect.ErrInvalidOptions, err))
		}
		defer stopProfile()
	}

	var (
		st  *inspect.TableStatus
		err error
	)
	if *location != "" {
		st, err = inspect.InspectLocation(ctx, *location, inspect.IOProps(ioProps, *location, getenv), opts)
	} else {
		st, err = inspect.InspectREST(ctx, inspect.RESTConfig{
			URI: *restURI, Credential: *cred, Scope: *scope, Warehouse: *warehouse,
			Identifier: *ident, Props: ioProps,
		}, opts)
	}
	if err != nil {
		fmt.Fprintln(stderr, "inspection failed:", err)
		if errors.Is(err, inspect.ErrInvalidOptions) {
			return fail(2, err)
		}
		return fail(1, err)
	}
	if err := out.Status(st); err != nil {
		fmt.Fprintln(stderr, "cannot write result:", err)
		return 1
	}
	if hwm, ok := peakRSS(); ok {
		opts.Logger.Debug("process", "peak_rss_bytes", hwm)
	}
	return 0
}

// peakRSS reads the process's peak resident set size (VmHWM) on Linux. A
// parent's rusage cannot give it: ru_maxrss keeps the pre-exec size of the
// forked parent, so a child started from a large process reports that.
func peakRSS() (int64, bool) {
	raw, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0, false
	}
	for _, line := range strings.Split(string(raw), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			var kb int64
			if _, err := fmt.Sscanf(strings.TrimSpace(rest), "%d kB", &kb); err == nil {
				return kb << 10, true
			}
		}
	}
	return 0, false
}

// startCPUProfile profiles the process into path until the returned function is called.
func startCPUProfile(path string) (func(), error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, err
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, err
	}
	return func() {
		pprof.StopCPUProfile()
		f.Close()
	}, nil
}
