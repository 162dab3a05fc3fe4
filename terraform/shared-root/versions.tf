terraform {
  required_version = ">= 1.6.0"
  required_providers {
    aws = {
      source  = "hashicorp/aws"
      version = "~> 5.80"
    }
    kubernetes = {
      source  = "hashicorp/kubernetes"
      version = "~> 2.35"
    }
    random = {
      source  = "hashicorp/random"
      version = "~> 3.6"
    }
    kustomization = {
      source  = "kbst/kustomization"
      version = "~> 0.9.6"
    }
  }

  # Partial configuration: terraform init -backend-config=backend.hcl (bucket, key, region,
  # dynamodb_table, encrypt = true). State holds the generated secrets: keep it encrypted.
  backend "s3" {}
}

provider "aws" {
  region = var.aws_region
  default_tags {
    tags = local.tags
  }
}

provider "kubernetes" {
  config_path    = var.kubeconfig_path
  config_context = var.kube_context
}

provider "kustomization" {
  kubeconfig_path = var.kubeconfig_path
  context         = var.kube_context
}
