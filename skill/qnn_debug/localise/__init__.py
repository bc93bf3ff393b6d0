"""Localising the first failing op without one all-tensor dump: bisection and decoder-block localisation.

Used when a dump is impossible (the LLM path, an old build that answers 7004) or cannot be trusted
(marking every tensor changes the graph: the observer effect, or the marked graph fails to finalise).
"""
