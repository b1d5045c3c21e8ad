"""The messages the run exchanges with its clients and activities: its input and config, the
state query's answer, decisions, stream events, the tool catalogue and every activity's request
and result, the states and events of the transition table. Pure data and checks, importing
nothing of the agent above them; ``models`` re-exports the names clients use most."""
