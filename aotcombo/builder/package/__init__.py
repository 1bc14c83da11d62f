"""The package: its manifest, the weights it holds, and the wheels."""
