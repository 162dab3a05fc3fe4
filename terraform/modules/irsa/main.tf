# IAM role for the icepack ServiceAccount (IRSA): only that ServiceAccount in that namespace
# may assume it, and it may touch only the named Glue databases and the warehouse prefix.

data "aws_partition" "current" {}
data "aws_region" "current" {}

locals {
  issuer     = trimprefix(var.oidc_issuer_url, "https://")
  glue       = "arn:${data.aws_partition.current.partition}:glue:${data.aws_region.current.name}:${var.glue_catalog_id}"
  bucket_arn = "arn:${data.aws_partition.current.partition}:s3:::${var.warehouse_bucket}"
  glue_resources = concat(
    ["${local.glue}:catalog"],
    [for d in var.glue_databases : "${local.glue}:database/${d}"],
    [for d in var.glue_databases : "${local.glue}:table/${d}/*"],
  )
}

data "aws_iam_policy_document" "trust" {
  statement {
    actions = ["sts:AssumeRoleWithWebIdentity"]
    principals {
      type        = "Federated"
      identifiers = [var.oidc_provider_arn]
    }
    condition {
      test     = "StringEquals"
      variable = "${local.issuer}:sub"
      values   = ["system:serviceaccount:${var.namespace}:${var.service_account}"]
    }
    condition {
      test     = "StringEquals"
      variable = "${local.issuer}:aud"
      values   = ["sts.amazonaws.com"]
    }
  }
}

resource "aws_iam_role" "this" {
  name                 = var.name
  description          = "Icepack services in ${var.namespace} (IRSA)"
  assume_role_policy   = data.aws_iam_policy_document.trust.json
  max_session_duration = 3600
  tags                 = var.tags
}

data "aws_iam_policy_document" "access" {
  # Discovery lists tables, the inspector reads metadata locations.
  statement {
    sid       = "GlueRead"
    actions   = ["glue:GetDatabase", "glue:GetDatabases", "glue:GetTable", "glue:GetTables"]
    resources = local.glue_resources
  }
  # An Iceberg commit on Glue swaps metadata_location with UpdateTable; maintenance never
  # creates or drops tables.
  statement {
    sid       = "GlueCommit"
    actions   = ["glue:UpdateTable"]
    resources = local.glue_resources
  }
  statement {
    sid       = "WarehouseList"
    actions   = ["s3:ListBucket"]
    resources = [local.bucket_arn]
    condition {
      test     = "StringLike"
      variable = "s3:prefix"
      values   = [var.warehouse_prefix, "${var.warehouse_prefix}/*"]
    }
  }
  # Rewrites write new files; expiry and orphan removal delete old ones.
  statement {
    sid       = "WarehouseObjects"
    actions   = ["s3:GetObject", "s3:PutObject", "s3:DeleteObject"]
    resources = ["${local.bucket_arn}/${var.warehouse_prefix}/*"]
  }
  dynamic "statement" {
    for_each = length(var.kms_key_arns) > 0 ? [1] : []
    content {
      sid       = "WarehouseKms"
      actions   = ["kms:Decrypt", "kms:GenerateDataKey"]
      resources = var.kms_key_arns
    }
  }
}

resource "aws_iam_role_policy" "access" {
  name   = "icepack-catalog-and-warehouse"
  role   = aws_iam_role.this.id
  policy = data.aws_iam_policy_document.access.json
}
