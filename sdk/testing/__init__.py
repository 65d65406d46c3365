"""Testing helpers with Beam's names: ``assert_that``, ``equal_to``, ``TestStream``, ``TestPipeline``."""
