# Icepack in prod: namespace, IRSA role, secrets, optional RDS, then the kustomize overlay,
# all wired in terraform/modules/icepack_env. What differs between environments is set here
# and in deploy/kustomize/overlays/prod; operator inputs come from variables.tf.

locals {
  environment = "prod"
  # Also the aws provider's default_tags (versions.tf).
  tags = merge(var.tags, { application = "icepack", environment = local.environment })
}

module "icepack" {
  source       = "../../modules/icepack_env"
  environment  = local.environment
  overlay_path = "${path.module}/../../../deploy/kustomize/overlays/prod"

  create_database                 = true
  database_sslmode                = "require"
  database_instance_class         = "db.r6g.large"
  database_multi_az               = true
  database_deletion_protection    = true
  secrets_recovery_window_in_days = 30
  kyuubi_password_secret_name     = "icepack/prod/kyuubi-password"

  oidc_provider_arn            = var.oidc_provider_arn
  oidc_issuer_url              = var.oidc_issuer_url
  glue_catalog_id              = var.glue_catalog_id
  glue_databases               = var.glue_databases
  warehouse_bucket             = var.warehouse_bucket
  warehouse_prefix             = var.warehouse_prefix
  warehouse_kms_key_arns       = var.warehouse_kms_key_arns
  vpc_id                       = var.vpc_id
  database_subnet_ids          = var.database_subnet_ids
  database_allowed_cidr_blocks = var.database_allowed_cidr_blocks
  kms_key_id                   = var.kms_key_id
  tags                         = var.tags
}
