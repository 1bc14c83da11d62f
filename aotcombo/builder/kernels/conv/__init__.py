"""Convolutions: rewrites that hand more of their work to cuDNN (``cudnn_epilogue``)."""
