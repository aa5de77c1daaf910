-- How the person approved a plan (elicitation, input_required, host, cli, api), kept with its
-- consumed receipt; NULL for a receipt consumed before this was recorded.
ALTER TABLE receipts ADD COLUMN channel TEXT;
