"""Engine logic with no Spark: trigger and window state machines, watermark algebra,
stage planning and the step loop. Testable with an injected clock."""
