-- How the person approved a plan, kept with its consumed receipt.
ALTER TABLE receipts ADD COLUMN channel TEXT;
