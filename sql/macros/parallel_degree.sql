-- parallel_degree: macro; a parallel degree as the index states it: the upstream's "not set" (spelled 0
-- before 2025-12-15) is a degree of 1.
create or replace macro parallel_degree(degree) as case when degree = 0 then 1 else degree end;
