"""The tuner: search spaces over schedules, a learned cost model, search strategies, measurement on a
pool of devices, and a database of records (AutoTVM, Ansor, MetaSchedule)."""
