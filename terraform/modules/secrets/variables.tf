variable "name_prefix" {
  description = "Prefix of the Secrets Manager secret names, e.g. icepack/prod."
  type        = string
  validation {
    condition     = can(regex("^[A-Za-z0-9/_+=.@-]+$", var.name_prefix)) && !endswith(var.name_prefix, "/")
    error_message = "name_prefix may use A-Za-z0-9/_+=.@- and must not end with a slash."
  }
}

variable "namespace" {
  description = "Kubernetes namespace that receives the Secret icepack-secrets."
  type        = string
  validation {
    condition     = can(regex("^[a-z0-9]([-a-z0-9]*[a-z0-9])?$", var.namespace))
    error_message = "namespace must be a DNS-1123 label."
  }
}

variable "database_host" {
  description = "Postgres host name the services connect to (RDS address or in-cluster Service)."
  type        = string
  validation {
    condition     = try(length(var.database_host) > 0, false)
    error_message = "database_host must be set: the RDS address, or external_database_host when create_database = false."
  }
}

variable "database_port" {
  description = "Postgres port."
  type        = number
  default     = 5432
  validation {
    condition     = var.database_port > 0 && var.database_port < 65536
    error_message = "database_port must be a TCP port."
  }
}

variable "database_name" {
  description = "Postgres database holding the icepack schema."
  type        = string
  default     = "icepack"
}

variable "database_username" {
  description = "Postgres role the services log in as."
  type        = string
  default     = "icepack"
  validation {
    condition     = can(regex("^[a-z_][a-z0-9_]{0,62}$", var.database_username))
    error_message = "database_username must be a plain lower-case Postgres identifier."
  }
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
  description = "Existing Secrets Manager secret whose value is the Polaris principal credential client_id:client_secret."
  type        = string
  validation {
    condition     = length(var.polaris_credential_secret_name) > 0
    error_message = "polaris_credential_secret_name must name an existing secret."
  }
}

variable "kyuubi_password_secret_name" {
  description = "Existing Secrets Manager secret holding the Kyuubi password; null where the environment uses Spark Connect."
  type        = string
  default     = null
}

variable "kms_key_id" {
  description = "KMS key (ARN or alias) that encrypts the generated secret; null uses the account's aws/secretsmanager key."
  type        = string
  default     = null
}

variable "recovery_window_in_days" {
  description = "Days a deleted secret can still be restored (0 deletes at once; use 0 only in dev)."
  type        = number
  default     = 30
  validation {
    condition     = var.recovery_window_in_days == 0 || (var.recovery_window_in_days >= 7 && var.recovery_window_in_days <= 30)
    error_message = "recovery_window_in_days must be 0 or between 7 and 30."
  }
}

variable "tags" {
  description = "Tags applied to AWS resources."
  type        = map(string)
  default     = {}
}
