"""The operator tools: the `kadence` command (kadence.ops.cli), the audits of the log, the read
model and the workflow code, and task queue descriptions. Not part of the SDK: `import kadence`
never imports them."""
