"""Who may call: API keys (apikeys.py) and the dashboard's sign-ins (dashboard_logins.py)."""
