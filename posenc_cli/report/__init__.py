"""`posenc compare`: runs read and grouped, tables and plots."""
