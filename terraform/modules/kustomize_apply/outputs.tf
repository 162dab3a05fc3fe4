output "applied_ids" {
  description = "IDs (group_kind/namespace/name) of every object applied from the overlay."
  value = sort(concat(
    keys(kustomization_resource.p0), keys(kustomization_resource.p1), keys(kustomization_resource.p2),
  ))
}

output "service_account_role_arn" {
  description = "The eks.amazonaws.com/role-arn annotation of the overlay's icepack ServiceAccount."
  value       = local.service_account.metadata.annotations["eks.amazonaws.com/role-arn"]
}
