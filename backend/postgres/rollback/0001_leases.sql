-- Down of version 1. Dropping the lease table loses every key's token
-- history: tokens would start again at 1 and could be handed out twice.
-- Refuse; drop it by hand if that is really wanted.
DO $$ BEGIN RAISE EXCEPTION 'lease: refusing to drop the lease table (its token history fences writes); drop it by hand'; END $$;
