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
}

variable "polaris_credential_secret_name" {
  description = "Existing Secrets Manager secret with the Polaris principal credential (client_id:client_secret)."
  type        = string
  default     = "icepack/prod/polaris-credential"
  validation {
    condition     = length(var.polaris_credential_secret_name) > 0
    error_message = "polaris_credential_secret_name must not be empty."
  }
}

variable "kyuubi_password_secret_name" {
  description = "Existing Secrets Manager secret with the Kyuubi password; null when the overlay uses Spark Connect."
  type        = string
  default     = "icepack/prod/kyuubi-password"
}

variable "create_database" {
  description = "Create an RDS Postgres instance; false uses external_database_host instead."
  type        = bool
  default     = true
}

variable "external_database_host" {
  description = "Postgres host when create_database = false (dev: the in-cluster icepack-postgres Service)."
  type        = string
  default     = null
}

variable "vpc_id" {
  description = "VPC of the cluster; needed when create_database = true."
  type        = string
  default     = null
}

variable "database_subnet_ids" {
  description = "Private subnets for RDS; needed when create_database = true."
  type        = list(string)
  default     = []
}

variable "database_allowed_cidr_blocks" {
  description = "Pod/node CIDRs allowed to reach RDS on 5432; needed when create_database = true."
  type        = list(string)
  default     = []
}

variable "database_instance_class" {
  description = "RDS instance class."
  type        = string
  default     = "db.r6g.large"
}

variable "kms_key_id" {
  description = "KMS key ARN for RDS storage and the generated secret; null uses AWS-managed keys."
  type        = string
  default     = null
}

variable "tags" {
  description = "Extra tags for every AWS resource."
  type        = map(string)
  default     = {}
}
