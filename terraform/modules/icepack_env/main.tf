# One Icepack environment: namespace, IRSA role, secrets, optional RDS, then the kustomize
# overlay. The env roots (terraform/env/<env>) call this module with their own values.

locals {
  namespace = "icepack-${var.environment}"
  tags      = merge(var.tags, { application = "icepack", environment = var.environment })
}

# Terraform owns the namespace so the Secret exists before the workloads that read it.
resource "kubernetes_namespace_v1" "icepack" {
  metadata {
    name = local.namespace
    labels = {
      "app.kubernetes.io/part-of" = "icepack"
    }
  }
}

module "irsa" {
  source            = "../irsa"
  name              = "icepack-${var.environment}"
  namespace         = local.namespace
  oidc_provider_arn = var.oidc_provider_arn
  oidc_issuer_url   = var.oidc_issuer_url
  glue_catalog_id   = var.glue_catalog_id
  glue_databases    = var.glue_databases
  warehouse_bucket  = var.warehouse_bucket
  warehouse_prefix  = var.warehouse_prefix
  kms_key_arns      = var.warehouse_kms_key_arns
  tags              = local.tags
}

module "database" {
  source              = "../database"
  count               = var.create_database ? 1 : 0
  identifier          = "icepack-${var.environment}"
  vpc_id              = var.vpc_id
  subnet_ids          = var.database_subnet_ids
  allowed_cidr_blocks = var.database_allowed_cidr_blocks
  password            = module.secrets.database_password
  instance_class      = var.database_instance_class
  multi_az            = var.database_multi_az
  deletion_protection = var.database_deletion_protection
  kms_key_id          = var.kms_key_id
  tags                = local.tags
}

module "secrets" {
  source                         = "../secrets"
  name_prefix                    = "icepack/${var.environment}"
  namespace                      = kubernetes_namespace_v1.icepack.metadata[0].name
  database_host                  = var.create_database ? module.database[0].address : var.external_database_host
  database_sslmode               = var.database_sslmode
  polaris_credential_secret_name = coalesce(var.polaris_credential_secret_name, "icepack/${var.environment}/polaris-credential")
  kyuubi_password_secret_name    = var.kyuubi_password_secret_name
  kms_key_id                     = var.kms_key_id
  recovery_window_in_days        = var.secrets_recovery_window_in_days
  tags                           = local.tags
}

module "kustomize_apply" {
  source       = "../kustomize_apply"
  overlay_path = var.overlay_path
  depends_on   = [module.secrets, module.irsa, module.database]
}

# The overlay hard-codes the role ARN so `kubectl apply -k` works without Terraform; warn
# when it drifts from the role created here.
check "irsa_annotation_matches_role" {
  assert {
    condition     = module.kustomize_apply.service_account_role_arn == module.irsa.role_arn
    error_message = "deploy/kustomize/overlays/${basename(var.overlay_path)}: set the ServiceAccount role ARN to ${module.irsa.role_arn}."
  }
}
