-- precision_label: macro; the index's name for a weight precision: bfloat16 is BF16, any other the
-- upstream's name upper-cased (fp8 -> FP8, mxfp4 -> MXFP4).
create or replace macro precision_label(weight_precision) as
    case weight_precision when 'bfloat16' then 'BF16' else upper(weight_precision) end;
