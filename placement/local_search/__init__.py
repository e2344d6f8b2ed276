"""WG_LS, the local search over distributed plans (search), and its compiled merge bounds
(kernels)."""
