# What the operator supplies for this environment (terraform.tfvars). The environment's own
# settings (database size, sslmode, secret names, ...) are in main.tf; the full descriptions
# and validation are in terraform/modules/icepack_env/variables.tf.

variable "aws_region" {
  description = "AWS region of the cluster, the Glue catalog and the warehouse bucket."
  type        = string
  validation {
    condition     = can(regex("^[a-z]{2}(-[a-z]+)+-[0-9]$", var.aws_region))
    error_message = "aws_region must look like eu-west-1."
  }
}

variable "kubeconfig_path" {
  description = "kubeconfig used by the kubernetes and kustomization providers."
  type        = string
  default     = "~/.kube/config"
  validation {
    condition     = length(var.kubeconfig_path) > 0
    error_message = "kubeconfig_path must not be empty."
  }
}

variable "kube_context" {
  description = "kubeconfig context of the target EKS cluster."
  type        = string
  validation {
    condition     = length(var.kube_context) > 0
    error_message = "kube_context must name a kubeconfig context."
  }
}

variable "oidc_provider_arn" {
  description = "ARN of the EKS cluster's IAM OIDC provider (IRSA trust)."
  type        = string
  validation {
    condition     = can(regex("^arn:aws[a-z-]*:iam::[0-9]{12}:oidc-provider/.+$", var.oidc_provider_arn))
    error_message = "oidc_provider_arn must be an IAM OIDC provider ARN."
  }
}

variable "oidc_issuer_url" {
  description = "OIDC issuer URL of the EKS cluster."
  type        = string
  validation {
    condition     = startswith(var.oidc_issuer_url, "https://")
    error_message = "oidc_issuer_url must start with https://."
  }
}

variable "glue_catalog_id" {
  description = "Account ID of the Glue Data Catalog holding the Iceberg tables."
  type        = string
  validation {
    condition     = can(regex("^[0-9]{12}$", var.glue_catalog_id))
    error_message = "glue_catalog_id must be a 12-digit AWS account ID."
  }
}

variable "glue_databases" {
  description = "Glue databases Icepack maintains."
  type        = list(string)
  validation {
    condition     = length(var.glue_databases) > 0
    error_message = "glue_databases must name at least one database."
  }
}

variable "warehouse_bucket" {
  description = "S3 bucket of the Iceberg warehouse."
  type        = string
  validation {
    condition     = length(var.warehouse_bucket) >= 3
    error_message = "warehouse_bucket must be an S3 bucket name."
  }
}

variable "warehouse_prefix" {
  description = "Warehouse key prefix inside the bucket (no leading or trailing slash)."
  type        = string
  validation {
    condition     = length(var.warehouse_prefix) > 0
    error_message = "warehouse_prefix must not be empty."
  }
}

variable "warehouse_kms_key_arns" {
  description = "KMS keys of SSE-KMS encrypted warehouse objects; empty for SSE-S3."
  type        = list(string)
  default     = []
  validation {
    condition     = alltrue([for k in var.warehouse_kms_key_arns : startswith(k, "arn:")])
    error_message = "warehouse_kms_key_arns must be KMS key ARNs."
  }
}

variable "vpc_id" {
  description = "VPC of the cluster; needed when the environment creates RDS (main.tf create_database)."
  type        = string
  default     = null
  validation {
    condition     = var.vpc_id == null || try(startswith(var.vpc_id, "vpc-"), false)
    error_message = "vpc_id must be a VPC ID (vpc-...)."
  }
}

variable "database_subnet_ids" {
  description = "Private subnets (two AZs or more) for RDS; needed when the environment creates RDS."
  type        = list(string)
  default     = []
  validation {
    condition     = alltrue([for s in var.database_subnet_ids : startswith(s, "subnet-")])
    error_message = "database_subnet_ids must be subnet IDs (subnet-...)."
  }
}

variable "database_allowed_cidr_blocks" {
  description = "Pod/node CIDRs allowed to reach RDS on 5432; needed when the environment creates RDS."
  type        = list(string)
  default     = []
  validation {
    condition     = alltrue([for c in var.database_allowed_cidr_blocks : can(cidrhost(c, 0)) && c != "0.0.0.0/0"])
    error_message = "database_allowed_cidr_blocks must be valid CIDRs other than 0.0.0.0/0."
  }
}

variable "kms_key_id" {
  description = "KMS key ARN for RDS storage and the generated secret; null uses AWS-managed keys."
  type        = string
  default     = null
  validation {
    condition     = var.kms_key_id == null || try(length(var.kms_key_id) > 0, false)
    error_message = "kms_key_id must be a KMS key ARN or null."
  }
}

variable "tags" {
  description = "Extra tags for every AWS resource (application and environment are added)."
  type        = map(string)
  default     = {}
  validation {
    condition     = alltrue([for k in keys(var.tags) : length(k) > 0 && !startswith(k, "aws:")])
    error_message = "tags keys must be non-empty and must not start with aws: (reserved)."
  }
}
