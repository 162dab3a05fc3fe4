terraform {
  required_version = ">= 1.6.0"
  required_providers {
    # kbst/kustomization renders an overlay with the kustomize library (same output as
    # `kubectl kustomize`) and applies each object server-side as its own resource.
    kustomization = {
      source  = "kbst/kustomization"
      version = "~> 0.9.6"
    }
  }
}
