output "namespace" {
  description = "Kubernetes namespace of this environment (icepack-<environment>)."
  value       = kubernetes_namespace_v1.icepack.metadata[0].name
}

output "irsa_role_arn" {
  description = "IAM role of the icepack ServiceAccount; the overlay's role-arn annotation must equal it."
  value       = module.irsa.role_arn
}

output "database_address" {
  description = "Postgres host the services use (RDS address or the external host)."
  value       = var.create_database ? module.database[0].address : var.external_database_host
}

output "database_password_secret_arn" {
  description = "Secrets Manager ARN of the generated Postgres password."
  value       = module.secrets.database_password_secret_arn
}

output "kubernetes_secret_name" {
  description = "Kubernetes Secret holding database-url, database-password, polaris-credential (and kyuubi-password)."
  value       = module.secrets.kubernetes_secret_name
}

output "applied_objects" {
  description = "Objects applied from the overlay."
  value       = module.kustomize_apply.applied_ids
}
