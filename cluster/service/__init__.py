"""``weaveplace serve``: a long-lived deployment with a control API."""
