"""Operational carbon of an estimate (`energy-index estimate --carbon-intensity G`): energy per unit times
a grid carbon intensity the user supplies, the O of a Software Carbon Intensity (SCI for AI)
calculation. Embodied emissions (the M) are not in it; the output says so every time."""

from typing import Any

EMBODIED = ("embodied emissions (manufacturing the GPUs, servers and buildings, the M of SCI) are not "
            "included")


def grams_per_unit(wh_per_unit: float, grams_per_kwh: float) -> float:
    """gCO2e per unit: Wh per unit ÷ 1,000 Wh per kWh × gCO2e per kWh."""
    return wh_per_unit / 1000 * grams_per_kwh


def operational_carbon(estimate: dict[str, Any], grams_per_kwh: float) -> dict[str, Any] | None:
    """The estimate's operational carbon per unit: per deployment within its measured range at the
    boundary's central factor, the lowest and highest of those, and the range over the deployments
    and the boundary's low and high factors (at gpu_only the factors are 1). None when no deployment
    covers the concurrency."""
    rows = [row for row in estimate["deployments"] if row["wh_per_unit"] is not None]
    if not rows:
        return None
    central = [grams_per_unit(row["wh_per_unit"], grams_per_kwh) for row in rows]
    return {
        "carbon_intensity_g_per_kwh": grams_per_kwh,
        "unit": "gCO2e per " + estimate["unit"].removeprefix("Wh per "),
        "boundary": estimate["boundary"],
        "min_g_per_unit": min(central),
        "max_g_per_unit": max(central),
        "low_g_per_unit": min(grams_per_unit(row["boundary_wh_per_unit_low"], grams_per_kwh) for row in rows),
        "high_g_per_unit": max(grams_per_unit(row["boundary_wh_per_unit_high"], grams_per_kwh) for row in rows),
        "embodied": EMBODIED,
    }


def carbon_sentence(carbon: dict[str, Any] | None, grams_per_kwh: float) -> str:
    """The estimate's carbon line, for people."""
    if carbon is None:
        return f"operational carbon at {grams_per_kwh:g} gCO2e/kWh: no estimate (no deployment covers it); {EMBODIED}"
    figure = (f"{carbon['min_g_per_unit']:.4g}" if carbon["min_g_per_unit"] == carbon["max_g_per_unit"] else
              f"{carbon['min_g_per_unit']:.4g} to {carbon['max_g_per_unit']:.4g}")
    return (f"operational carbon at {grams_per_kwh:g} gCO2e/kWh (your grid intensity): {figure} {carbon['unit']}, "
            f"range {carbon['low_g_per_unit']:.4g} to {carbon['high_g_per_unit']:.4g} over the deployments and the "
            f"{carbon['boundary']} boundary's factors; {EMBODIED}")
