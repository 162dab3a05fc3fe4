# Applies a rendered overlay. The provider sorts objects into three priority groups
# (namespaces and CRDs, then workloads, then webhooks); each group waits for the one before.
# KEDA's CRDs are a cluster prerequisite, installed with KEDA itself, not here.
# Objects whose immutable fields change (the migrate Job's template on a new image tag) are
# replaced rather than patched by the provider.

data "kustomization_build" "this" {
  path = var.overlay_path
}

resource "kustomization_resource" "p0" {
  for_each = data.kustomization_build.this.ids_prio[0]
  manifest = data.kustomization_build.this.manifests[each.value]
}

resource "kustomization_resource" "p1" {
  for_each = data.kustomization_build.this.ids_prio[1]
  manifest = data.kustomization_build.this.manifests[each.value]
  wait     = var.wait_for_rollout

  depends_on = [kustomization_resource.p0]
}

resource "kustomization_resource" "p2" {
  for_each   = data.kustomization_build.this.ids_prio[2]
  manifest   = data.kustomization_build.this.manifests[each.value]
  depends_on = [kustomization_resource.p1]
}

locals {
  # The rendered ServiceAccount, so the env root can check its IRSA annotation against the
  # role Terraform made (the overlay hard-codes the ARN for plain `kubectl apply -k` users).
  service_account_ids = [for id in keys(data.kustomization_build.this.manifests) : id if startswith(id, "_/ServiceAccount/")]
  service_account     = jsondecode(data.kustomization_build.this.manifests[one(local.service_account_ids)])
}
