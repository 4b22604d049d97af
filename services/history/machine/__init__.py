"""The history service's state machine, one module per entity (as Temporal's server keeps each
sub-state-machine in its own file).

Each family module owns its events' apply, its commands' decide, its timeouts and its effects, and
exports them in tables (`APPLY`, `COMMANDS`, `TASK_COMMANDS`, `TIMEOUTS`, `EFFECTS`); `dispatch`
joins the tables, so every dispatcher is a lookup:

- `lifecycle`: start, signal-with-start, close, continue-as-new, cron, cancel request, terminate, run timeout
- `workflow_task`: the workflow task, its completion's commands, its timeouts and dispatch
- `activity`: activities, their attempts, retries, heartbeats and timeouts
- `timer`: user timers
- `child`: child workflows and the signals and cancel requests a run sends other workflows
- `messages`: signals and updates a run receives (queries are held in `services/history/step.py`)
"""
