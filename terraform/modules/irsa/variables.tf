variable "name" {
  description = "IAM role name, e.g. icepack-prod. Must match the role ARN in the kustomize overlay."
  type        = string
  validation {
    condition     = can(regex("^[A-Za-z0-9+=,.@_-]{1,64}$", var.name))
    error_message = "name must be a valid IAM role name (1-64 chars of A-Za-z0-9+=,.@_-)."
  }
}

variable "namespace" {
  description = "Kubernetes namespace of the icepack ServiceAccount (the overlay's namespace)."
  type        = string
  validation {
    condition     = can(regex("^[a-z0-9]([-a-z0-9]*[a-z0-9])?$", var.namespace))
    error_message = "namespace must be a DNS-1123 label."
  }
}

variable "service_account" {
  description = "Name of the Kubernetes ServiceAccount allowed to assume the role."
  type        = string
  default     = "icepack"
}

variable "oidc_provider_arn" {
  description = "ARN of the EKS cluster's IAM OIDC provider."
  type        = string
  validation {
    condition     = can(regex("^arn:aws[a-z-]*:iam::[0-9]{12}:oidc-provider/.+$", var.oidc_provider_arn))
    error_message = "oidc_provider_arn must be an IAM OIDC provider ARN."
  }
}

variable "oidc_issuer_url" {
  description = "The cluster's OIDC issuer URL (https://oidc.eks.<region>.amazonaws.com/id/...)."
  type        = string
  validation {
    condition     = startswith(var.oidc_issuer_url, "https://")
    error_message = "oidc_issuer_url must start with https://."
  }
}

variable "glue_catalog_id" {
  description = "AWS account ID that owns the Glue Data Catalog holding the Iceberg tables."
  type        = string
  validation {
    condition     = can(regex("^[0-9]{12}$", var.glue_catalog_id))
    error_message = "glue_catalog_id must be a 12-digit AWS account ID."
  }
}

variable "glue_databases" {
  description = "Glue databases whose tables Icepack may read and commit maintenance to."
  type        = list(string)
  validation {
    condition     = length(var.glue_databases) > 0 && alltrue([for d in var.glue_databases : d != "*"])
    error_message = "glue_databases must name at least one database and must not be \"*\"."
  }
}

variable "warehouse_bucket" {
  description = "S3 bucket of the Iceberg warehouse (bucket name, not ARN)."
  type        = string
  validation {
    condition     = can(regex("^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$", var.warehouse_bucket))
    error_message = "warehouse_bucket must be an S3 bucket name."
  }
}

variable "warehouse_prefix" {
  description = "Key prefix of the warehouse inside the bucket, without leading or trailing slash."
  type        = string
  validation {
    condition     = length(var.warehouse_prefix) > 0 && !startswith(var.warehouse_prefix, "/") && !endswith(var.warehouse_prefix, "/")
    error_message = "warehouse_prefix must be non-empty (least privilege) and have no leading or trailing slash."
  }
}

variable "kms_key_arns" {
  description = "KMS keys that encrypt warehouse objects (SSE-KMS); empty when the bucket uses SSE-S3."
  type        = list(string)
  default     = []
}

variable "tags" {
  description = "Tags applied to every resource."
  type        = map(string)
  default     = {}
}
