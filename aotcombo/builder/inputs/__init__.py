"""What the user hands over, checked before anything is traced: the model file, the options,
the example inputs per shape, the environment, and the names of ``forward``'s inputs."""
