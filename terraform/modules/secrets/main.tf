# Secrets flow one way: Terraform generates or reads them, keeps the generated one in Secrets
# Manager, and writes the Kubernetes Secret icepack-secrets that the pods read as env vars.
# No secret value ever appears in deploy/kustomize. Terraform state holds these values:
# keep the state backend encrypted and access-controlled.

# URL-safe specials only, so the password needs no escaping inside ICEPACK_DATABASE_URL,
# and none of the characters RDS rejects (/ @ " and space).
resource "random_password" "database" {
  length           = 32
  special          = true
  override_special = "-_.~"
}

resource "aws_secretsmanager_secret" "database" {
  #checkov:skip=CKV2_AWS_57:Rotation must also rewrite icepack-secrets and restart pods, so it is a Terraform apply (replace random_password), not a Lambda rotation.
  name                    = "${var.name_prefix}/database-password"
  description             = "Icepack Postgres password (role ${var.database_username})"
  kms_key_id              = var.kms_key_id
  recovery_window_in_days = var.recovery_window_in_days
  tags                    = var.tags
}

resource "aws_secretsmanager_secret_version" "database" {
  secret_id     = aws_secretsmanager_secret.database.id
  secret_string = random_password.database.result
}

data "aws_secretsmanager_secret_version" "polaris" {
  secret_id = var.polaris_credential_secret_name
}

data "aws_secretsmanager_secret_version" "kyuubi" {
  count     = var.kyuubi_password_secret_name == null ? 0 : 1
  secret_id = var.kyuubi_password_secret_name
}

locals {
  database_url = format(
    "postgresql://%s:%s@%s:%d/%s?sslmode=%s",
    var.database_username, random_password.database.result, var.database_host,
    var.database_port, var.database_name, var.database_sslmode,
  )
  kyuubi = { for v in data.aws_secretsmanager_secret_version.kyuubi : "kyuubi-password" => v.secret_string }
}

# Keys are the contract with deploy/kustomize (secretKeyRef and TriggerAuthentication).
resource "kubernetes_secret_v1" "icepack" {
  metadata {
    name      = "icepack-secrets"
    namespace = var.namespace
    labels = {
      "app.kubernetes.io/name"       = "icepack"
      "app.kubernetes.io/managed-by" = "terraform"
    }
  }
  type = "Opaque"
  data = merge({
    "database-url"       = local.database_url
    "database-password"  = random_password.database.result
    "polaris-credential" = data.aws_secretsmanager_secret_version.polaris.secret_string
  }, local.kyuubi)
}
