-- parallel_degree: macro; a parallel degree as the index states it. The upstream spelled "not set" as
-- 0 before 2025-12-15; not set means a degree of 1.
create or replace macro parallel_degree(degree) as case when degree = 0 then 1 else degree end;
