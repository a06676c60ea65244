"""The probe: runs inside the target torch environment (stdlib + torch [+ transformers, depyf])."""
