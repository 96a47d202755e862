"""Plugins bundled with the sidecar. Each is loaded through its entry point in the group `nrllm_sidecar`,
the same way a third-party plugin is."""
