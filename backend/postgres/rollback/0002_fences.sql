-- Down of version 2. Dropping the fence table forgets the tokens the
-- resources accepted, so an old holder's write would be accepted again.
-- Refuse; drop it by hand if that is really wanted.
DO $$ BEGIN RAISE EXCEPTION 'lease: refusing to drop the fence table (it remembers the tokens resources accepted); drop it by hand'; END $$;
