"""What every token mixer and norm of the core shares: `step.LayerStep` (one layer's call context) and
`norms.rms` (the one RMS statistic) with the RMSNorm forms built on it. Imports no other part of the core."""
