"""The agent run: the loop (``workflow``), its one state model, transition table, memory,
progress tracking, reflection, and the messages clients and activities exchange with it.

Deterministic code only. Import the workflow class from ``treadle.workflows.agent.workflow``; this
package's ``__init__`` stays empty so that activities can import the data modules beside it
without loading the workflow (which imports the activities, inside the sandbox pass-through).
"""
