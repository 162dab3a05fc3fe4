# Re-exported from terraform/modules/icepack_env (descriptions there).

output "namespace" {
  description = "Kubernetes namespace of this environment."
  value       = module.icepack.namespace
}

output "irsa_role_arn" {
  description = "IAM role of the icepack ServiceAccount; the overlay's role-arn annotation must equal it."
  value       = module.icepack.irsa_role_arn
}

output "database_address" {
  description = "Postgres host the services use (RDS address or the external host)."
  value       = module.icepack.database_address
}

output "database_password_secret_arn" {
  description = "Secrets Manager ARN of the generated Postgres password."
  value       = module.icepack.database_password_secret_arn
}

output "kubernetes_secret_name" {
  description = "Kubernetes Secret holding database-url, database-password, polaris-credential (and kyuubi-password)."
  value       = module.icepack.kubernetes_secret_name
}

output "applied_objects" {
  description = "Objects applied from the overlay."
  value       = module.icepack.applied_objects
}
