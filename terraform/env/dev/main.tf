# Icepack in dev: IRSA role, secrets, optional RDS, then the kustomize overlay.
# Values that differ between environments live here and in deploy/kustomize/overlays/dev.

locals {
  environment = "dev"
  namespace   = "icepack-dev"
  tags        = merge(var.tags, { application = "icepack", environment = local.environment })
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
  source            = "../../modules/irsa"
  name              = "icepack-${local.environment}"
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
  source              = "../../modules/database"
  count               = var.create_database ? 1 : 0
  identifier          = "icepack-${local.environment}"
  vpc_id              = var.vpc_id
  subnet_ids          = var.database_subnet_ids
  allowed_cidr_blocks = var.database_allowed_cidr_blocks
  password            = module.secrets.database_password
  instance_class      = var.database_instance_class
  multi_az            = false
  deletion_protection = false
  kms_key_id          = var.kms_key_id
  tags                = local.tags
}

module "secrets" {
  source                         = "../../modules/secrets"
  name_prefix                    = "icepack/${local.environment}"
  namespace                      = kubernetes_namespace_v1.icepack.metadata[0].name
  database_host                  = var.create_database ? module.database[0].address : var.external_database_host
  database_sslmode               = "disable"
  polaris_credential_secret_name = var.polaris_credential_secret_name
  kyuubi_password_secret_name    = var.kyuubi_password_secret_name
  kms_key_id                     = var.kms_key_id
  recovery_window_in_days        = 0
  tags                           = local.tags
}

module "kustomize_apply" {
  source       = "../../modules/kustomize_apply"
  overlay_path = "${path.module}/../../../deploy/kustomize/overlays/dev"
  depends_on   = [module.secrets, module.irsa, module.database]
}

# The overlay hard-codes the role ARN so `kubectl apply -k` works without Terraform; warn
# when it drifts from the role created here.
check "irsa_annotation_matches_role" {
  assert {
    condition     = module.kustomize_apply.service_account_role_arn == module.irsa.role_arn
    error_message = "deploy/kustomize/overlays/dev: set the ServiceAccount role ARN to ${module.irsa.role_arn}."
  }
}
