# evocamp: evaluation campaigns for quality diversity, ES and BO.
# Thin entry point; the rules live in workflow/rules/.
import os

from snakemake.exceptions import WorkflowError

# The default campaign, unless a campaign file is given with --configfile: that file
# is then the whole campaign (keys it leaves out take the schema defaults), with
# --config key=value on top. Snakemake would otherwise merge it into this one.
# A copy of Snakefile and workflow/ alone has no config/: it runs the campaign that
# --configfile names.
if not workflow.overwrite_configfiles:
    if not os.path.exists("config/config.yaml"):
        raise WorkflowError(
            "no campaign file: give one with --configfile my_campaign.yaml (the default "
            f"campaign, config/config.yaml, is not in {os.getcwd()}: copy it from the "
            "repository to run it)"
        )

    configfile: "config/config.yaml"


report: "workflow/report/workflow.rst"


include: "workflow/rules/common.smk"
include: "workflow/rules/campaign.smk"
include: "workflow/rules/figures.smk"


rule all:
    default_target: True
    input:
        campaign_targets,
