-- wh_from_joules: macro; joules as watt-hours (1 Wh = 3,600 J).
create or replace macro wh_from_joules(joules) as joules / 3600;
