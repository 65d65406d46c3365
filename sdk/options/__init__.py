"""Pipeline options (``sparkbeam.options.pipeline_options``)."""
