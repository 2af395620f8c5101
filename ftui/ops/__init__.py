"""The operations layer: start, resume, join, start a job (eval, predict, export), stop,
delete. Torch-free, and silent: each operation returns a result (with the notices it has
for the user) or raises one typed error per refusal (ftui.ops.errors), carrying the message
the user reads. The front ends, the CLI (ftui.cli) and the app (ftui.tui), only render them,
so both refuse and allow the same things in the same words."""
