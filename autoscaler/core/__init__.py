"""The pure core: records, the state fold, the journal, billing, leases, errors."""
