# Settings of the environment itself: the env root sets them in its main.tf.

variable "environment" {
  description = "Environment name; names the namespace icepack-<environment>, the IAM role and RDS instance icepack-<environment> and the secrets icepack/<environment>/..."
  type        = string
  validation {
    condition     = can(regex("^[a-z][a-z0-9-]{0,30}[a-z0-9]$", var.environment))
    error_message = "environment must be a short lower-case DNS label, e.g. prod."
  }
}

variable "overlay_path" {
  description = "Path of this environment's kustomize overlay (deploy/kustomize/overlays/<environment>), relative to the env root."
  type        = string
  validation {
    condition     = can(regex("deploy/kustomize/overlays/[a-z0-9-]+/?$", var.overlay_path))
    error_message = "overlay_path must point at deploy/kustomize/overlays/<environment>."
  }
}

variable "create_database" {
  description = "Create an RDS Postgres instance; false uses external_database_host instead."
  type        = bool
}

variable "external_database_host" {
  description = "Postgres host when create_database = false (dev: the in-cluster icepack-postgres Service)."
  type        = string
  default     = null
  validation {
    condition     = var.external_database_host == null || try(length(var.external_database_host) > 0, false)
    error_message = "external_database_host must be null or a host name."
  }
}

variable "database_instance_class" {
  description = "RDS instance class."
  type        = string
  default     = "db.t4g.medium"
  validation {
    condition     = startswith(var.database_instance_class, "db.")
    error_message = "database_instance_class must be an RDS instance class (db.*)."
  }
}

variable "database_multi_az" {
  description = "Run RDS with a standby in a second AZ."
  type        = bool
  default     = false
}

variable "database_deletion_protection" {
  description = "Refuse to delete the RDS instance; false only for environments that are torn down."
  type        = bool
  default     = true
}

variable "database_sslmode" {
  description = "libpq sslmode in the connection URL: require for RDS, disable for the dev in-cluster server."
  type        = string
  default     = "require"
  validation {
    condition     = contains(["disable", "require", "verify-ca", "verify-full"], var.database_sslmode)
    error_message = "database_sslmode must be one of disable, require, verify-ca, verify-full."
  }
}

variable "polaris_credential_secret_name" {
  description = "Existing Secrets Manager secret with the Polaris principal credential (client_id:client_secret); null means icepack/<environment>/polaris-credential."
  type        = string
  default     = null
  validation {
    condition     = var.polaris_credential_secret_name == null || try(length(var.polaris_credential_secret_name) > 0, false)
    error_message = "polaris_credential_secret_name must be null or a secret name."
  }
}

variable "kyuubi_password_secret_name" {
  description = "Existing Secrets Manager secret with the Kyuubi password; null when the overlay uses Spark Connect."
  type        = string
  default     = null
  validation {
    condition     = var.kyuubi_password_secret_name == null || try(length(var.kyuubi_password_secret_name) > 0, false)
    error_message = "kyuubi_password_secret_name must be null or a secret name."
  }
}

variable "secrets_recovery_window_in_days" {
  description = "Days a deleted generated secret can still be restored (0 deletes at once; use 0 only in dev)."
  type        = number
  default     = 30
  validation {
    condition     = var.secrets_recovery_window_in_days == 0 || (var.secrets_recovery_window_in_days >= 7 && var.secrets_recovery_window_in_days <= 30)
    error_message = "secrets_recovery_window_in_days must be 0 or between 7 and 30."
  }
}

# Operator-supplied values (terraform.tfvars of the env root), passed through.

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

variable "kms_key_id" {
  description = "KMS key ARN for RDS storage and the generated secret; null uses AWS-managed keys."
  type        = string
  default     = null
}

variable "tags" {
  description = "Extra tags for every AWS resource (application and environment are added)."
  type        = map(string)
  default     = {}
}
