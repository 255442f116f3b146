"""Design-space sweeps (issue 14): a spec's design grid x workloads, built and run as a Dask task
graph, with an area proxy per design point, results kept in SQLite, and the Pareto front.

* :mod:`.spec` reads and checks a spec (TOML) before anything is built;
* :mod:`.tasks` is what the Dask workers run (build, area, one run);
* :mod:`.engine` plans a sweep against the database and runs it on a cluster;
* :mod:`.db` is the SQLite schema (table ``runs``);
* :mod:`.pareto` reads a database back: the Pareto fronts and a comparison of two databases.

docs/sweeps.md is the user's page.
"""
