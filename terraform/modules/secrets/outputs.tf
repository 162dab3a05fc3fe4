output "database_password" {
  description = "Generated Postgres password; give it to the database module as the master password."
  value       = random_password.database.result
  sensitive   = true
}

output "database_password_secret_arn" {
  description = "Secrets Manager ARN of the generated Postgres password."
  value       = aws_secretsmanager_secret.database.arn
}

output "kubernetes_secret_name" {
  description = "Name of the Kubernetes Secret the manifests reference (icepack-secrets)."
  value       = kubernetes_secret_v1.icepack.metadata[0].name
}
