"""Scale-out on Ray: evaluate, the single-layer sweep and SMA perturbations over Ray actors."""
