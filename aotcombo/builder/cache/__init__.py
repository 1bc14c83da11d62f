"""The build cache: traces and kernels kept between builds under exact fingerprints."""
