"""Load generation: schedules, request mixes and trace readers, the Locust user and the load process.

Nothing heavy is imported here; locust and gevent are imported only by the modules that drive load.
"""
