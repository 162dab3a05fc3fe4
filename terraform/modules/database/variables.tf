variable "identifier" {
  description = "RDS instance identifier, e.g. icepack-prod."
  type        = string
  validation {
    condition     = can(regex("^[a-z][a-z0-9-]{0,62}$", var.identifier))
    error_message = "identifier must start with a letter and use lower-case letters, digits and hyphens."
  }
}

variable "vpc_id" {
  description = "VPC of the EKS cluster."
  type        = string
  validation {
    condition     = startswith(var.vpc_id, "vpc-")
    error_message = "vpc_id must be a VPC ID (vpc-...)."
  }
}

variable "subnet_ids" {
  description = "Private subnets (at least two AZs) for the DB subnet group."
  type        = list(string)
  validation {
    condition     = length(var.subnet_ids) >= 2
    error_message = "subnet_ids needs at least two subnets in different AZs."
  }
}

variable "allowed_cidr_blocks" {
  description = "CIDRs of the EKS pods/nodes allowed to reach Postgres on 5432."
  type        = list(string)
  validation {
    condition     = length(var.allowed_cidr_blocks) > 0 && alltrue([for c in var.allowed_cidr_blocks : can(cidrhost(c, 0)) && c != "0.0.0.0/0"])
    error_message = "allowed_cidr_blocks must be valid, non-empty, and must not include 0.0.0.0/0."
  }
}

variable "database_name" {
  description = "Database created on the instance."
  type        = string
  default     = "icepack"
}

variable "username" {
  description = "Master username; the services log in as this role."
  type        = string
  default     = "icepack"
}

variable "password" {
  description = "Master password (from the secrets module)."
  type        = string
  sensitive   = true
}

variable "engine_version" {
  description = "Postgres major version; Icepack is tested on 15."
  type        = string
  default     = "15"
  validation {
    condition     = can(regex("^1[5-7](\\.[0-9]+)?$", var.engine_version))
    error_message = "engine_version must be Postgres 15, 16 or 17."
  }
}

variable "instance_class" {
  description = "RDS instance class."
  type        = string
  default     = "db.t4g.medium"
}

variable "allocated_storage_gb" {
  description = "Initial storage in GiB; autoscaling may grow it to 4x."
  type        = number
  default     = 50
  validation {
    condition     = var.allocated_storage_gb >= 20
    error_message = "allocated_storage_gb must be at least 20."
  }
}

variable "multi_az" {
  description = "Standby in a second AZ (prod)."
  type        = bool
  default     = true
}

variable "deletion_protection" {
  description = "Refuse to delete the instance; turn off only to tear down a test environment."
  type        = bool
  default     = true
}

variable "backup_retention_days" {
  description = "Days of automated backups."
  type        = number
  default     = 7
  validation {
    condition     = var.backup_retention_days >= 1 && var.backup_retention_days <= 35
    error_message = "backup_retention_days must be between 1 and 35."
  }
}

variable "kms_key_id" {
  description = "KMS key ARN for storage and Performance Insights; null uses the AWS-managed key."
  type        = string
  default     = null
}

variable "tags" {
  description = "Tags applied to every resource."
  type        = map(string)
  default     = {}
}
