"""vlr-plugins: vision-language retrieval recipes as plug-ins for LAVIS, OpenCLIP and MMEngine.

``import vlr_plugins`` needs only torch and imports no trainer ecosystem; each
integration lives in :mod:`vlr_plugins.integrations` and is imported on demand.
"""

__version__ = "0.1.0"

__all__ = ["__version__"]
