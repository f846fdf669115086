"""The Gaussian mixture's prior, shared by the model and its mean-field scheme:
π ~ Dirichlet(1, …, 1), σ²_kj ~ InvGamma(1, 1), μ_kj | σ²_kj ~ N(0, 4σ²_kj)."""

VARIANCE_SHAPE = 1.0
VARIANCE_SCALE = 1.0
MEAN_VARIANCE_RATIO = 4.0
