"""Operational carbon of an estimate (`energy-index estimate --carbon-intensity G`): the estimate's energy
figures times a grid carbon intensity the user supplies, the O of a Software Carbon Intensity (SCI for AI)
calculation, per unit, per response and per 1,000 responses. Embodied emissions (the M) are not in it;
the output says so every time."""

from typing import Any

EMBODIED = ("embodied emissions (manufacturing the GPUs, servers and buildings, the M of SCI) are not "
            "included")
RESPONSES = 1000  # the batch of responses the third figure is given for
TOKEN_UNIT = "million output tokens"


def grams_per_unit(wh_per_unit: float, grams_per_kwh: float) -> float:
    """gCO2e per unit: Wh per unit ÷ 1,000 Wh per kWh × gCO2e per kWh."""
    return wh_per_unit / 1000 * grams_per_kwh


def _grams(wh: dict[str, float], grams_per_kwh: float, unit: str, **about: Any) -> dict[str, Any]:
    """The four energy figures of one unit (the lowest and highest deployment at the boundary's central
    factor, the range's low and high ends) in gCO2e."""
    return {"unit": unit, **about, **{name: grams_per_unit(value, grams_per_kwh) for name, value in wh.items()}}


def operational_carbon(estimate: dict[str, Any], grams_per_kwh: float) -> dict[str, Any] | None:
    """The estimate's operational carbon at its boundary, from its own energy figures and nothing else, so
    that each carbon figure is its energy figure × the intensity: per unit (min/max over the deployments at
    the boundary's central factor; low/high, the estimate's range, which spans what `spans` says), per
    response and per 1,000 responses. A response is one image or video in a diffusion task; in a token
    task, a response of --output-tokens N tokens, and without N there is no per-response figure (`null`,
    `per_response_missing` says why). None when no deployment covers the concurrency."""
    spread = estimate["range"]
    if spread is None:
        return None
    per_unit = {"min": estimate["min_wh_per_unit"], "max": estimate["max_wh_per_unit"],
                "low": spread["low"], "high": spread["high"]}
    unit_label = estimate["unit"].removeprefix("Wh per ")
    document: dict[str, Any] = {
        "carbon_intensity_g_per_kwh": grams_per_kwh, "boundary": estimate["boundary"], "spans": spread["spans"],
        "per_unit": _grams(per_unit, grams_per_kwh, f"gCO2e per {unit_label}"),
    }
    if unit_label != TOKEN_UNIT:  # one image or video is one response
        per_response, about = per_unit, {"output": f"one {unit_label} a response"}
    elif (response := estimate.get("per_response")) is not None:
        per_response = {"min": response["min_wh"], "max": response["max_wh"], "low": response["low"],
                        "high": response["high"]}
        about = {"output_tokens": response["output_tokens"]}
    else:
        per_response, about = None, {}
        document["per_response_missing"] = ("a token task's response needs its length: --output-tokens N gives "
                                            "carbon per response of N output tokens")
    document["per_response"] = None if per_response is None else _grams(
        per_response, grams_per_kwh, "gCO2e per response", **about)
    document["per_1000_responses"] = None if per_response is None else _grams(
        {name: value * RESPONSES for name, value in per_response.items()}, grams_per_kwh,
        f"gCO2e per {RESPONSES:,} responses", **about)
    return document | {"embodied": EMBODIED}


def _figures(grams: dict[str, Any]) -> str:
    central = f"{grams['min']:.4g}" + (f" to {grams['max']:.4g}" if f"{grams['max']:.4g}" != f"{grams['min']:.4g}"
                                       else "")
    low, high = f"{grams['low']:.4g}", f"{grams['high']:.4g}"
    return f"{central} {grams['unit']} (range {low} to {high})" if low != high else \
        f"{central} {grams['unit']} (range {low}, no spread)"


def carbon_lines(carbon: dict[str, Any] | None, grams_per_kwh: float) -> list[str]:
    """The estimate's operational carbon, for people: a heading naming the intensity, the boundary, what
    the range spans and what is left out, then one line per unit, response and 1,000 responses."""
    heading = f"operational carbon at {grams_per_kwh:g} gCO2e/kWh (your grid intensity)"
    if carbon is None:
        return [f"{heading}: no estimate (no deployment covers it); {EMBODIED}"]
    lines = [f"{heading}, {carbon['boundary']} boundary; each range is the energy range × the intensity, "
             f"{carbon['spans']}; {EMBODIED}", f"  per unit: {_figures(carbon['per_unit'])}"]
    if (response := carbon["per_response"]) is None:
        lines.append(f"  per response: none ({carbon['per_response_missing']})")
    else:
        output = (f"of {response['output_tokens']} output tokens" if "output_tokens" in response
                  else f"({response['output']})")
        lines += [f"  per response {output}: {_figures(response)}",
                  f"  per {RESPONSES:,} responses: {_figures(carbon['per_1000_responses'])}"]
    return lines
