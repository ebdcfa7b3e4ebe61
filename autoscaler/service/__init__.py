"""The service: jobs, runners, the deadline pool, the API, the status page, metrics, daily costs."""
