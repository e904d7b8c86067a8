-- audit_expected: macro; an audit rule's bound as text, what audit_findings and the audit summary
-- print: '0.95 to 1.05' (around_one), 'at least 0.2', 'at most 20'. Six decimals, trailing zeros and
-- point dropped: DuckDB and Spark print a decimal alike, unlike printf's %g (Java's pads it: 0.00000);
-- for bounds of at most six decimals it is what %g writes.
create or replace macro audit_expected(direction, tolerance) as
    case when direction = 'around_one' then
        trim(trailing '.' from trim(trailing '0' from cast(cast(1 - tolerance as decimal(18, 6)) as varchar)))
        || ' to '
        || trim(trailing '.' from trim(trailing '0' from cast(cast(1 + tolerance as decimal(18, 6)) as varchar)))
    else
        case direction when 'at_least' then 'at least ' else 'at most ' end
        || trim(trailing '.' from trim(trailing '0' from cast(cast(tolerance as decimal(18, 6)) as varchar)))
    end;
