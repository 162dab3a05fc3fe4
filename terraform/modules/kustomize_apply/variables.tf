variable "overlay_path" {
  description = "Path to a kustomize overlay, e.g. deploy/kustomize/overlays/prod."
  type        = string
  validation {
    condition     = can(regex("deploy/kustomize/overlays/(dev|stage|preprod|prod)/?$", var.overlay_path))
    error_message = "overlay_path must point at deploy/kustomize/overlays/<dev|stage|preprod|prod>."
  }
}

variable "wait_for_rollout" {
  description = "Wait for Deployments to become ready before Terraform finishes."
  type        = bool
  default     = true
}
