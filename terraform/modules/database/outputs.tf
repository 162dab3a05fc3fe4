output "address" {
  description = "Host name of the instance, for ICEPACK_DATABASE_URL (via the secrets module)."
  value       = aws_db_instance.this.address
}

output "port" {
  description = "Postgres port."
  value       = aws_db_instance.this.port
}

output "database_name" {
  description = "Name of the Icepack database."
  value       = aws_db_instance.this.db_name
}

output "instance_arn" {
  description = "ARN of the RDS instance."
  value       = aws_db_instance.this.arn
}

output "security_group_id" {
  description = "Security group guarding the instance."
  value       = aws_security_group.this.id
}
